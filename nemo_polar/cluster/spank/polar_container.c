/*
 * polar_container: a SPANK plugin standing in for pyxis where pyxis and enroot are not installed, so that
 * NeMo-RL's ray.sub runs unchanged. It registers the five srun options ray.sub passes
 * (--container-image, --container-mounts, --container-workdir, --container-name, --no-container-mount-home)
 * and runs each task
 *   mode=host   (the default) on the host: the image and mounts are recorded, not applied;
 *   mode=chroot in the image, which must then be a root filesystem folder: a private mount namespace with
 *               /proc, /sys, /dev, /tmp, $HOME (unless --no-container-mount-home) and each SRC:DST[:ro] of
 *               --container-mounts bound in, then chroot.
 * Either way the task starts in --container-workdir and sees SPANK_CONTAINER_{IMAGE,MOUNTS,WORKDIR,NAME}.
 * With log=FILE, one line per task says what it was asked. Named-container reuse and image import are
 * pyxis's and not done here.
 *
 * plugstack.conf:  required /path/polar_container.so [mode=host|chroot] [log=FILE]
 * build:           gcc -shared -fPIC -o polar_container.so polar_container.c   (slurm/spank.h: libslurm-dev)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <slurm/spank.h>

SPANK_PLUGIN(polar_container, 1);

enum { OPT_IMAGE, OPT_MOUNTS, OPT_WORKDIR, OPT_NAME, OPT_NO_HOME, N_OPTS };

static char *opt[N_OPTS];    /* each option's argument ("1" for the flag), NULL where not given */
static int chroot_mode = 0;
static char log_path[4096] = "";

static int remember(int val, const char *optarg, int remote)
{
    (void)remote;
    if (val < 0 || val >= N_OPTS)
        return -1;
    free(opt[val]);
    opt[val] = strdup(optarg ? optarg : "1");
    return opt[val] ? 0 : -1;
}

struct spank_option spank_options[] = {
    {"container-image", "image", "[polar_container] the image (mode=chroot: a root filesystem folder)", 1,
     OPT_IMAGE, remember},
    {"container-mounts", "SRC:DST[:ro],...", "[polar_container] folders bound in (mode=chroot)", 1, OPT_MOUNTS,
     remember},
    {"container-workdir", "dir", "[polar_container] the task's working directory", 1, OPT_WORKDIR, remember},
    {"container-name", "name", "[polar_container] recorded only (no container reuse)", 1, OPT_NAME, remember},
    {"no-container-mount-home", NULL, "[polar_container] do not bind $HOME (mode=chroot)", 0, OPT_NO_HOME,
     remember},
    SPANK_OPTIONS_TABLE_END};

int slurm_spank_init(spank_t sp, int ac, char **av)
{
    (void)sp;
    for (int i = 0; i < ac; i++) {
        if (!strcmp(av[i], "mode=chroot"))
            chroot_mode = 1;
        else if (!strcmp(av[i], "mode=host"))
            chroot_mode = 0;
        else if (!strncmp(av[i], "log=", 4))
            snprintf(log_path, sizeof(log_path), "%s", av[i] + 4);
        else {
            slurm_error("polar_container: unknown argument %s (mode=host|chroot, log=FILE)", av[i]);
            return -1;
        }
    }
    return 0;
}

static void log_task(spank_t sp)
{
    uint32_t job = 0, step = 0;
    int task = -1;
    char host[256] = "?";
    FILE *f;

    if (!log_path[0] || !(f = fopen(log_path, "a")))
        return;
    spank_get_item(sp, S_JOB_ID, &job);
    spank_get_item(sp, S_JOB_STEPID, &step);
    spank_get_item(sp, S_TASK_ID, &task);
    gethostname(host, sizeof(host) - 1);
    fprintf(f, "job=%u step=%u task=%d host=%s mode=%s image=%s mounts=%s workdir=%s name=%s no_home=%d\n", job,
            step, task, host, chroot_mode ? "chroot" : "host", opt[OPT_IMAGE] ? opt[OPT_IMAGE] : "-",
            opt[OPT_MOUNTS] ? opt[OPT_MOUNTS] : "-", opt[OPT_WORKDIR] ? opt[OPT_WORKDIR] : "-",
            opt[OPT_NAME] ? opt[OPT_NAME] : "-", opt[OPT_NO_HOME] != NULL);
    fclose(f);
}

/* mkdir -p */
static int make_dirs(const char *path)
{
    char buf[4096];
    snprintf(buf, sizeof(buf), "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p == '/') {
            *p = 0;
            if (mkdir(buf, 0755) && errno != EEXIST)
                return -1;
            *p = '/';
        }
    }
    return (mkdir(buf, 0755) && errno != EEXIST) ? -1 : 0;
}

/* SRC bound at ROOT/DST, read-only where asked */
static int bind_in(const char *root, const char *src, const char *dst, int ro)
{
    char target[4096];
    snprintf(target, sizeof(target), "%s%s", root, dst);
    if (make_dirs(target) || mount(src, target, NULL, MS_BIND | MS_REC, NULL)) {
        slurm_error("polar_container: binding %s at %s: %s", src, target, strerror(errno));
        return -1;
    }
    if (ro && mount(NULL, target, NULL, MS_BIND | MS_REMOUNT | MS_RDONLY, NULL)) {
        slurm_error("polar_container: %s read-only: %s", target, strerror(errno));
        return -1;
    }
    return 0;
}

static int enter_root(spank_t sp, const char *root)
{
    struct stat st;
    char home[4096] = "";
    static const char *system_dirs[] = {"/proc", "/sys", "/dev", "/tmp"};

    if (stat(root, &st) || !S_ISDIR(st.st_mode)) {
        slurm_error("polar_container: mode=chroot needs --container-image to be a root filesystem folder: %s", root);
        return -1;
    }
    if (unshare(CLONE_NEWNS) || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL)) {
        slurm_error("polar_container: a private mount namespace: %s", strerror(errno));
        return -1;
    }
    for (size_t i = 0; i < sizeof(system_dirs) / sizeof(*system_dirs); i++)
        if (bind_in(root, system_dirs[i], system_dirs[i], 0))
            return -1;
    if (!opt[OPT_NO_HOME] && spank_getenv(sp, "HOME", home, sizeof(home)) == ESPANK_SUCCESS && home[0] == '/')
        if (bind_in(root, home, home, 0))
            return -1;
    if (opt[OPT_MOUNTS]) {
        char *list = strdup(opt[OPT_MOUNTS]), *save = NULL;
        for (char *m = strtok_r(list, ",", &save); m; m = strtok_r(NULL, ",", &save)) {
            char *dst = strchr(m, ':'), *flags;
            if (dst)
                *dst++ = 0;
            else
                dst = m;
            flags = strchr(dst, ':');
            if (flags)
                *flags++ = 0;
            if (bind_in(root, m, dst, flags && !strcmp(flags, "ro"))) {
                free(list);
                return -1;
            }
        }
        free(list);
    }
    if (chroot(root) || chdir("/")) {
        slurm_error("polar_container: chroot %s: %s", root, strerror(errno));
        return -1;
    }
    return 0;
}

int slurm_spank_task_init_privileged(spank_t sp, int ac, char **av)
{
    (void)ac;
    (void)av;
    if (!spank_remote(sp))
        return 0;
    log_task(sp);
    return (chroot_mode && opt[OPT_IMAGE]) ? enter_root(sp, opt[OPT_IMAGE]) : 0;
}

int slurm_spank_task_init(spank_t sp, int ac, char **av)
{
    static const char *names[] = {"SPANK_CONTAINER_IMAGE", "SPANK_CONTAINER_MOUNTS", "SPANK_CONTAINER_WORKDIR",
                                  "SPANK_CONTAINER_NAME"};
    (void)ac;
    (void)av;
    if (!spank_remote(sp))
        return 0;
    for (int i = OPT_IMAGE; i <= OPT_NAME; i++)
        if (opt[i])
            spank_setenv(sp, names[i], opt[i], 1);
    if (opt[OPT_WORKDIR] && chdir(opt[OPT_WORKDIR])) {
        slurm_error("polar_container: --container-workdir %s: %s", opt[OPT_WORKDIR], strerror(errno));
        return -1;
    }
    return 0;
}

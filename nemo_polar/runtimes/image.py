"""`ImageRuntime`: a root filesystem folder run as the root of each command, under bubblewrap; for
machines and clusters without a container engine, and the proof that nothing of the host leaks into a
session (nothing of this machine is visible inside but the folders below).

    runtime: {kind: image, image: .deps/rootfs/bookworm}     # scripts/setup.sh rootfs builds it (mmdebstrap)

The image is read-only; each session writes to its own overlay (an upper folder in the session folder,
like docker's container layer), so the agent can work in the image's own folders (`workdir: /testbed`)
and everything it wrote goes with the session. `image` may stack folders, `TOP:...:BASE` (overlayfs's
lowerdir): e.g. a task's repository over a shared root filesystem.

Each command is one `unshare --mount` (plus `--user --map-root-user` when not root) in which a shell
mounts the overlay and becomes bubblewrap: the merged tree as /, /dev and /proc of its own, the same
binds as docker (HOME, the working copy or the image's folder, the toolchain and our scripts read-only,
the tunnel's socket, the task's volumes), its own pid, ipc and uts namespaces, and for network "proxy"
or "none" a network namespace with only loopback, where the forwarder (the toolchain's Python) listens
at the proxy's address. The mount lives only in that namespace: when the command's process group is
killed, nothing is left mounted. Commands run as the gateway's user mapped to root inside; an
unprivileged gateway needs a kernel that mounts overlayfs in a user namespace (5.11+) and an image
folder it owns (`tar -x --no-same-owner`, `mmdebstrap --mode=unshare` then `chown -R`).

Limits: no CPU, memory or GPU limits (the spec refuses them); the image's own ENV is unknown (a folder
has no config), so PATH is Debian's default unless `runtime.env.PATH` says otherwise.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path

from pydantic import field_validator

from ..containment import Containment
from ..sandbox import ProcessGroups
from .base import ContainerRuntime, ContainerSettings, outside, remove_tree
from .spec import RuntimeSpec

# mount the overlay, then become the rest of the command line (bubblewrap)
MOUNT = 'mount -t overlay polar -o "lowerdir=$1,upperdir=$2,workdir=$3" "$4" && shift 4 && exec "$@"'


def _tool(name: str) -> str:
    found = shutil.which(name) or shutil.which(name, path="/usr/sbin:/usr/bin:/sbin:/bin")
    if found is None:
        raise RuntimeError(
            f"runtime.kind image needs `{name}` on this machine (apt-get install bubblewrap util-linux)"
        )
    return found


class ImageSettings(ContainerSettings):
    """A root filesystem folder, or several joined by ':' (the first on top); no resource limits."""

    @field_validator("image")
    @classmethod
    def _folders(cls, image: str) -> str:
        if not all(layer.startswith("/") for layer in image.split(":")):
            raise ValueError("runtime.image for kind image: absolute folders joined by ':'")
        return image


class ImageRuntime(ContainerRuntime):
    name = "image"
    Settings = ImageSettings

    def __init__(
        self, spec: RuntimeSpec, settings: ImageSettings, root: str | Path, session_id: str, proxy_url: str | None
    ) -> None:
        super().__init__(spec, settings, root, session_id, proxy_url)
        self.layers = [Path(layer) for layer in settings.image.split(":")]
        self.bwrap, self.unshare, self.mount, self.sh = _tool("bwrap"), _tool("unshare"), _tool("mount"), _tool("sh")
        self.upper, self.scratch, self.root = self.folder / "upper", self.folder / "overlay-work", self.folder / "root"
        self.containment = Containment(self.folder.name, settings.limits, [self.folder])
        self.groups = ProcessGroups(self.containment)

    async def start(self) -> None:
        try:
            for layer in self.layers:
                if not (layer / "bin" / "sh").exists() and layer == self.layers[-1]:
                    raise RuntimeError(f"runtime.image {str(layer)!r} is not a root filesystem (no bin/sh)")
                if not layer.is_dir():
                    raise RuntimeError(f"runtime.image {str(layer)!r} is not a folder")
            await self._prepare()
            for folder in (self.upper, self.scratch, self.root):
                folder.mkdir()
            self.containment.start()
            # the working directory exists even when the image has none (docker creates its working_dir too)
            (self.upper / self.inside_work.relative_to("/")).mkdir(parents=True, exist_ok=True)
            await self.cut_history()
        except BaseException:
            await self.stop()
            raise

    def argv(self, argv: list[str]) -> list[str]:
        """The full command line of one command (a pure function of the spec and the session folder)."""
        ns = [self.unshare, "--mount", "--propagation", "private"]
        if os.geteuid() != 0:
            ns += ["--user", "--map-root-user"]
        lower = ":".join(str(layer.resolve()) for layer in self.layers)
        mount = [self.sh, "-c", MOUNT, "polar-image", lower, str(self.upper), str(self.scratch), str(self.root)]
        box = [self.bwrap, "--bind", str(self.root), "/", "--dev", "/dev", "--proc", "/proc"]
        for bind in self.binds():
            box += ["--bind" if bind.writable else "--ro-bind", str(bind.host), str(bind.inside)]
        box += ["--chdir", str(self.inside_work), "--unshare-pid", "--unshare-ipc", "--unshare-uts"]
        box += ["--hostname", "polar", "--die-with-parent", "--cap-drop", "ALL"]  # root inside, without its powers
        if self.spec.network != "host":
            box.append("--unshare-net")  # a namespace of its own with only loopback
        return [*ns, "--", *mount, *box, "--", *self.forwarded(argv)]

    async def exec(
        self, argv: list[str], env: dict[str, str] | None = None, timeout: float | None = None
    ) -> tuple[int, str, str]:
        """Run to completion; at `timeout` the whole process group is killed and rc is TIMEOUT_RC."""
        full_env = {"PATH": self.path, "LANG": "C.UTF-8"} | self.command_env(env)
        return await self.groups.run(self.argv(argv), full_env, None, timeout)

    async def quiesce(self) -> list[str]:
        """The session's process groups killed; each command's pid namespace goes with it (local.py)."""
        return [f"process group {pgid}" for pgid in self.groups.kill_all()]

    async def changed_outside(self) -> list[str] | None:
        """What the session wrote to its overlay's upper folder (the image is read-only), outside the
        working copy; the mount points bubblewrap made are not changes."""

        def walk() -> list[str]:
            mounts = {str(b.inside) for b in self.binds()} | {"/dev", "/proc"}
            found = []
            for path in sorted(self.upper.rglob("*")):
                inside = "/" + str(path.relative_to(self.upper))
                empty_dir = path.is_dir() and not path.is_symlink() and not any(path.iterdir())
                if not (empty_dir and any(m == inside or m.startswith(inside + "/") for m in mounts)):
                    found.append(inside)
            return outside(found, self.inside_work)

        return await asyncio.to_thread(walk)

    async def stop(self) -> None:
        try:
            self.groups.kill_all()
            self.containment.stop()
        finally:
            if self.tunnel is not None:
                await self.tunnel.stop()
            await asyncio.to_thread(remove_tree, self.folder)

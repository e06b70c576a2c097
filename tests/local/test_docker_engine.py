"""The Docker engine of our own: how a root filesystem becomes an image, and what a failed `tar` leaves (nothing)."""

from __future__ import annotations

import os
import signal
import time

import pytest

from nemo_polar.errors import ConfigError
from nemo_polar.local import docker_engine
from nemo_polar.local.docker_engine import STAMP_LABEL, DockerEngine, image_name, pipe

from ..conftest import requires_docker

# `tar` as it fails part way: GNU tar leaves out a file it cannot read, writes the rest, and exits 2 at the end.
FAILING_TAR = """#!/bin/sh
/usr/bin/tar --exclude=./secret "$@"
echo "tar: ./secret: Cannot open: Permission denied" >&2
echo "tar: Exiting with failure status due to previous errors" >&2
exit 2
"""


def test_a_pipe_gives_the_producers_exit_and_stderr_beside_the_consumers_output():
    producer, consumer = pipe(["sh", "-c", "head -c 100000 /dev/zero; echo cut short >&2; exit 2"], ["wc", "-c"])
    assert (producer.returncode, producer.stderr) == (2, b"cut short\n")
    assert (consumer.returncode, consumer.stdout.strip()) == (0, b"100000")


def test_a_consumer_that_leaves_ends_the_producer():
    """The parent keeps no copy of the pipe: once `head` has its 10 bytes and exits, `yes` gets SIGPIPE at its next
    write (with a copy held, it blocked on the full pipe for ever, and so did the wait for it)."""
    started = time.monotonic()
    producer, consumer = pipe(["yes"], ["head", "-c", "10"], timeout=30)
    assert consumer.stdout == b"y\n" * 5 and producer.returncode == -signal.SIGPIPE
    assert time.monotonic() - started < 10


def test_a_consumer_out_of_time_is_killed_with_its_producer():
    started = time.monotonic()
    producer, consumer = pipe(["sleep", "30"], ["sleep", "30"], timeout=0.5)
    assert consumer.returncode == 124 and producer.returncode == -signal.SIGKILL
    assert time.monotonic() - started < 10


@pytest.fixture
def engine(tmp_path, monkeypatch):
    """An engine of the test's own, with no root filesystem to import when it starts."""
    monkeypatch.setattr(docker_engine, "ROOTFS", tmp_path / "rootfs")
    (tmp_path / "rootfs").mkdir()
    engine = DockerEngine(tmp_path / "docker")
    try:
        engine.up()
        yield engine
    finally:
        engine.down()


@requires_docker
def test_a_root_filesystem_that_tar_failed_on_is_not_imported(engine, tmp_path, monkeypatch):
    """A tar that exits 2 after writing an archive without the file it could not read: docker imports what it got,
    and once named and labelled with the folder's stamp, that image was kept as current for good. Now the failure
    names tar's complaint, no image is left (named or not), and a good tar imports it."""
    folder = tmp_path / "rootfs" / "tiny"
    (folder / "bin").mkdir(parents=True)
    (folder / "bin" / "sh").write_text("")
    (folder / "secret").write_text("what the image must hold")
    fake = tmp_path / "fake"
    fake.mkdir()
    (fake / "tar").write_text(FAILING_TAR)
    (fake / "tar").chmod(0o755)
    with monkeypatch.context() as m:
        m.setenv("PATH", f"{fake}:{os.environ['PATH']}")
        with pytest.raises(ConfigError, match="tar exited 2: .*secret: Cannot open"):
            engine.import_rootfs()
    assert engine.client("image", "inspect", image_name("tiny")).returncode != 0
    assert engine.client("images", "-aq").stdout.split() == []  # not even an image without a name
    assert engine.import_rootfs() == [image_name("tiny")]
    label = engine.client(
        "image", "inspect", "--format", f'{{{{index .Config.Labels "{STAMP_LABEL}"}}}}', "polar-tiny:local"
    )
    assert label.stdout.decode().strip().endswith("-tiny")
    assert engine.import_rootfs() == []  # current: not imported again

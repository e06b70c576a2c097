"""The forwarder inside a sandbox: TCP on loopback -> a Unix socket bind-mounted from the host.

    python forward.py [--ready] HOST:PORT[,HOST:PORT...] UNIX_PATH -- COMMAND...

It listens first, then forks: the child serves connections, the parent becomes COMMAND (exec). So
COMMAND starts only once the port accepts (the kernel queues connections until the child accepts),
keeps its pid and exit status, and the child stays in COMMAND's process group, which the runtime
kills. `--ready` prints a line once listening (for a long-lived forwarder whose COMMAND is a sleep).

Standard library only, and run as a plain script (`python -I -S`): it must start fast and must work
with a container image's own python.
"""

import asyncio
import os
import signal
import socket
import sys

READY = "polar-forward: ready"
CHUNK = 1 << 16


def listen(addresses: list[str]) -> list[socket.socket]:
    socks = []
    for address in addresses:
        host, _, port = address.rpartition(":")
        host = host.strip("[]")
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, int(port)))
        except OSError:
            if family == socket.AF_INET6:  # ::1 for "localhost" is best effort (no IPv6 in the namespace)
                sock.close()
                continue
            raise
        sock.listen(128)
        socks.append(sock)
    return socks


async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(CHUNK):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()  # half-close: an HTTP client may wait for the answer after sending EOF
    except (ConnectionError, OSError):
        writer.close()


async def splice(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, other: asyncio.Future) -> None:
    """Both directions of one connection until both ends are done."""
    try:
        up_reader, up_writer = await other
    except OSError:
        writer.close()
        return
    try:
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
    finally:
        writer.close()
        up_writer.close()


async def serve(socks: list[socket.socket], unix_path: str) -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await splice(reader, writer, asyncio.ensure_future(asyncio.open_unix_connection(unix_path)))

    servers = [await asyncio.start_server(handle, sock=sock) for sock in socks]
    await asyncio.gather(*(s.serve_forever() for s in servers))


def _die_with_parent() -> None:
    try:
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: never outlive COMMAND
    except Exception:  # noqa: BLE001 - not Linux or no libc: the group kill still ends us
        pass


def main(argv: list[str]) -> None:
    ready = argv[:1] == ["--ready"]
    if ready:
        argv = argv[1:]
    if len(argv) < 4 or argv[2] != "--":
        sys.exit("usage: forward.py [--ready] HOST:PORT[,HOST:PORT] UNIX_PATH -- COMMAND...")
    addresses, unix_path, command = argv[0].split(","), argv[1], argv[3:]
    socks = listen(addresses)
    if os.fork() == 0:
        _die_with_parent()
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):  # never hold the command's output pipes open
            os.dup2(null, fd)
        asyncio.run(serve(socks, unix_path))
        os._exit(0)
    for sock in socks:
        sock.close()
    if ready:
        print(READY, flush=True)
    try:
        os.execvp(command[0], command)
    except OSError as exc:
        print(f"polar-forward: cannot run {command[0]!r}: {exc}", file=sys.stderr, flush=True)
        os._exit(127)  # what a shell returns for a command it cannot run


if __name__ == "__main__":
    main(sys.argv[1:])

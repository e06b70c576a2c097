"""Our scripts that run inside a session's sandbox, with the toolchain's Python (or the host's, for
`local`): the proxy forwarder and the OpenHands runner. Each is a plain script, standard library only
at import, and the folder is mounted read-only at a fixed path (`/polar/scripts` in docker, apptainer
and image; `/tmp/polar/scripts` under bubblewrap)."""

from nemo_polar.bench.sessions import *  # noqa: F401,F403  (the simulator lives with the benchmark that replays it)

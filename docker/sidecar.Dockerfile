# The image `polar.container` names (docs/gpu_cluster.md): NeMo-RL's image of the tested commit, plus nemo_polar in a
# venv of its own with `polar` on PATH and the harness CLIs. ray.sub runs our sidecar in it on every node (the rollout
# server on the first, a gateway on each); the driver keeps NeMo-RL's own image (`nemo_rl.container`).
#
#   docker build -f docker/sidecar.Dockerfile -t nemo-polar:1 .          # from this repository's root
#
# Build arguments:
#   BASE        NeMo-RL's image, built from its checkout at the commit nemo_polar/nemo_rl/versions.py names (it
#               carries uv and a Python); tests/cluster/test_sidecar_image.py builds on Debian with python3 and uv
#   UV_OPTIONS  how uv finds packages where no index is reachable, e.g. "--no-index --find-links /wheels"
#   EXTRAS      nemo_polar's extras: docker (the docker runtime's SDK); add swebench for the swebench evaluator
#   HARNESSES   the set-up parts that install the harness CLIs (scripts/setup.sh: node, mini, openhands, aider, hermes,
#               openclaw); "" for none
ARG BASE=nemo-rl:7ea279a
FROM ${BASE}
ARG UV_OPTIONS=""
ARG EXTRAS="docker"
ARG HARNESSES="node mini openhands aider hermes openclaw"
COPY . /opt/nemo_polar
WORKDIR /opt/nemo_polar
# editable: the package reads conf/, recipes/ and gym/ beside it
RUN uv venv --python python3 .venv \
 && uv pip install --python .venv/bin/python ${UV_OPTIONS} -e ".[${EXTRAS}]" \
 && ln -sf /opt/nemo_polar/.venv/bin/polar /usr/local/bin/polar \
 && polar --help > /dev/null
RUN if [ -n "${HARNESSES}" ]; then POLAR_PYTHON=/opt/nemo_polar/.venv/bin/python scripts/setup.sh ${HARNESSES}; fi

# r2v serve in a container: any registered env id behind OpenEnv's server, offline once built (docs/serving.md).
#
#   docker build -f docker/serve.Dockerfile -t r2v-serve .
#   docker run --rm -p 127.0.0.1:8000:8000 r2v-serve --env R2V/TextWorld-v0 --env-kwargs '{"suite": "small"}' --token T
#
# BASE: any Debian-based image with python3 >= 3.10 and pip (python:3.11-slim; with no registry, the bookworm root
# that scripts/docker_base.sh imports as r2v-bookworm:base). The build needs the package index (pip, apt);
# running needs no network.
ARG BASE=python:3.11-slim
FROM ${BASE}

# cmake, g++: alfworld compiles fast-downward and jericho from source; bubblewrap: the code and terminal sandboxes;
# the rest: what Terminal-Bench tasks routinely call (scripts/install.sh installs the same on a host).
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      cmake g++ make bubblewrap tmux curl wget git jq sqlite3 unzip zip bc file procps tree less xxd ca-certificates \
    && rm -rf /var/lib/apt/lists/*

# fast-downward's build (alfworld) calls `python`: a Debian root has only python3
RUN command -v python >/dev/null || ln -s "$(command -v python3)" /usr/local/bin/python

WORKDIR /opt/r2v
COPY pyproject.toml README.md ./
COPY r2v_envs ./r2v_envs
COPY r2v_agents ./r2v_agents
COPY r2v_eval ./r2v_eval
COPY r2v_train ./r2v_train
RUN python3 -m pip install --no-cache-dir ".[textworld,alfworld,humaneval,serve]"
# Terminal-Bench's judge runs the task's tests with the host's pytest when tasks run locally (no Docker in Docker)
RUN python3 -m pip install --no-cache-dir "pytest>=8"

# The small TextWorld suite, generated now so the image serves it offline; other suites generate on first use.
ENV R2V_CACHE=/opt/r2v-cache
RUN python3 -c "from r2v_envs.textworld.generate import pregenerate; print(len(pregenerate('small', 2)), 'games')"

# A uid of its own; the cache stays readable (and writable, for games generated on first use).
RUN useradd --create-home --uid 10001 r2v && chown -R r2v /opt/r2v-cache
USER r2v
EXPOSE 8000
# 0.0.0.0 inside the container: the port mapping (-p 127.0.0.1:8000:8000) decides who reaches it.
ENTRYPOINT ["python3", "-m", "r2v_envs.serving", "--host", "0.0.0.0", "--port", "8000"]
CMD ["--env", "R2V/TextWorld-v0", "--env-kwargs", "{\"suite\": \"small\"}"]

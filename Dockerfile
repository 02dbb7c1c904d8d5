# syntax=docker/dockerfile:1
# Tidemark image: Java 17 + the project in a virtualenv, non-root, tini as PID 1.
# Build:  docker build -t tidemark:0.1.0 .
#         or, without a Docker engine, scripts/build-image.sh (podman/buildah, base image made
#         from Debian packages and passed as PYTHON_IMAGE; docs/deployment.md)
# Run:    docker run -v $PWD/pipelines/purchases.sql:/etc/tidemark/program.sql:ro \
#           -e TIDEMARK_BOOTSTRAP_SERVERS=broker:9092 tidemark:0.1.0
# The same image serves as Spark executor on Kubernetes (`entrypoint.sh executor`).
#
# PYTHON_IMAGE is any Debian bookworm image whose `python` is CPython 3.11 with venv: the
# official python image (python in /usr/local/bin) or Debian's own python3, python3-venv and
# python-is-python3 (python in /usr/bin). The venv path below, lib/python3.11, holds on both.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# ---- deps: pyproject.toml's runtime dependencies, in a venv --------------------------------
# Their own stage and layer: a change to app/ rebuilds only the small wheel below and the
# layer that installs it, instead of downloading pyspark again and copying the whole venv;
# only a change to pyproject.toml or constraints.txt rebuilds this stage. constraints.txt pins
# every distribution installed here to the version the tests ran with
# (scripts/freeze-constraints.py; tests/unit/test_runtime_dependencies.py checks it).
FROM ${PYTHON_IMAGE} AS deps
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
RUN python -m venv /opt/tidemark/venv
COPY pyproject.toml constraints.txt ./
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" \
        > /tmp/requirements.txt \
    && /opt/tidemark/venv/bin/pip install --no-compile -c constraints.txt -r /tmp/requirements.txt \
    && find /opt/tidemark/venv -name '__pycache__' -type d -prune -exec rm -rf {} +

# ---- wheel: the project from this source tree ----------------------------------------------
FROM deps AS wheel
# README.md is the package's long description (pyproject.toml's readme).
COPY README.md ./
COPY app ./app
RUN /opt/tidemark/venv/bin/pip wheel --no-deps --wheel-dir /wheels .

# ---- runtime ------------------------------------------------------------------------------
FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="tidemark" \
      org.opencontainers.image.description="Streaming SQL over Kafka on Spark Structured Streaming" \
      org.opencontainers.image.licenses="Apache-2.0"

# Debian's security updates replace package versions in place, so pinning them would break
# the build at the next update; the base image tag pins the release (bookworm).
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless tini procps \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 tidemark \
    && useradd --system --uid 10001 --gid tidemark --home-dir /var/lib/tidemark \
        --shell /usr/sbin/nologin tidemark \
    && mkdir -p /etc/tidemark /var/lib/tidemark/checkpoint /var/lib/tidemark/spark-local \
    && chown -R tidemark:tidemark /var/lib/tidemark

COPY --from=deps /opt/tidemark/venv /opt/tidemark/venv
# The project's wheel into the venv; pip check: the pinned versions satisfy every requirement.
RUN --mount=type=bind,from=wheel,source=/wheels,target=/tmp/wheels \
    /opt/tidemark/venv/bin/pip install --no-cache-dir --disable-pip-version-check --no-deps \
        --no-compile /tmp/wheels/tidemark-*.whl \
    && /opt/tidemark/venv/bin/pip check \
    && find /opt/tidemark/venv -name '__pycache__' -type d -prune -exec rm -rf {} +
COPY docker/entrypoint.sh /opt/tidemark/entrypoint.sh
COPY docker/spark-defaults.conf /opt/tidemark/spark-conf/spark-defaults.conf
COPY pipelines /opt/tidemark/pipelines
COPY schemas /opt/tidemark/schemas

# PYSPARK_PYTHON: Python workers must run the venv's interpreter, which has the project's
# packages (ARCHITECTURE.md). SPARK_DRIVER_MEMORY is read by spark-submit when PySpark starts
# the driver JVM. Scratch space and the checkpoint live under /var/lib/tidemark, the one
# writable volume; the root filesystem can stay read-only. LANG: Java 17 takes its default
# charset from the locale; the official python image sets C.UTF-8, a bare Debian base does not.
ENV PATH=/opt/tidemark/venv/bin:$PATH \
    LANG=C.UTF-8 \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYSPARK_PYTHON=/opt/tidemark/venv/bin/python \
    PYSPARK_DRIVER_PYTHON=/opt/tidemark/venv/bin/python \
    SPARK_HOME=/opt/tidemark/venv/lib/python3.11/site-packages/pyspark \
    SPARK_CONF_DIR=/opt/tidemark/spark-conf \
    SPARK_DRIVER_MEMORY=1g \
    SPARK_LOCAL_DIRS=/var/lib/tidemark/spark-local \
    TIDEMARK_PROGRAM=/etc/tidemark/program.sql \
    TIDEMARK_CHECKPOINT=/var/lib/tidemark/checkpoint \
    TIDEMARK_METRICS_PORT=9108 \
    TIDEMARK_LOG_FORMAT=json \
    HOME=/var/lib/tidemark

WORKDIR /opt/tidemark
USER 10001:10001
VOLUME ["/var/lib/tidemark"]
EXPOSE 9108

# Liveness as the chart probes it: /healthz on the metrics port, with Python (no curl here).
HEALTHCHECK --interval=30s --timeout=5s --start-period=120s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('TIDEMARK_METRICS_PORT', '9108'), timeout=4)"]

ENTRYPOINT ["/usr/bin/tini", "--", "/opt/tidemark/entrypoint.sh"]
CMD ["run"]

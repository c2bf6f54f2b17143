# syntax=docker/dockerfile:1
# The function's runtime image: a venv built on Debian 13 and copied into distroless Python,
# which has the same /usr/bin/python3 (3.13) the venv links to, and no shell or package manager.

FROM debian:13-slim AS build
ARG DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
 && apt-get install --no-install-recommends --yes python3-venv \
 && rm -rf /var/lib/apt/lists/*
# Debian 13's python3 is 3.13, the one distroless python3-debian13 runs. A base image with
# another Python stops the build here. tests/edge/test_python_versions.py reads this line and checks
# that the version is one it compares output on; CI must have it.
RUN python3 -c 'import sys; assert sys.version_info[:2] == (3, 13), sys.version'
# The same path in both stages: a venv's scripts hard-code their interpreter's location.
RUN python3 -m venv /venv \
 && /venv/bin/pip install --no-cache-dir --upgrade pip
WORKDIR /src
COPY pyproject.toml README.md ./
COPY function ./function
# The CLI's default Composition is package data: `policy guard` reads it, or the build fails.
RUN /venv/bin/pip install --no-cache-dir . \
 && /venv/bin/python -c "import function.fn" \
 && /venv/bin/workspace-sandbox policy guard > /dev/null

FROM gcr.io/distroless/python3-debian13:nonroot
COPY --from=build /venv /venv
EXPOSE 9443
# Crossplane mounts its mTLS certificates and sets TLS_SERVER_CERTS_DIR; `serve` reads it.
USER nonroot:nonroot
ENTRYPOINT ["/venv/bin/workspace-sandbox", "serve"]

# vgpu-scheduler: one image for every subcommand (registrar, informer, extender, all-in-one, simulate).
#   docker build -t vgpu-scheduler:0.1.0 .
#   docker run --rm vgpu-scheduler:0.1.0 --help

FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/vgpu-scheduler
WORKDIR /src
# Only what `pip install .` needs: the project metadata, the package and its two subpackages (linked in; the
# installed package is a real tree, docs/layout.md).
COPY pyproject.toml README.md ./
COPY vgpu_scheduler ./vgpu_scheduler
COPY shared ./shared
COPY services ./services
RUN /opt/vgpu-scheduler/bin/pip install .

FROM python:3.11-slim
ENV PATH=/opt/vgpu-scheduler/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
RUN groupadd --system --gid 10001 vgpu \
    && useradd --system --uid 10001 --gid vgpu --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin vgpu
COPY --from=build /opt/vgpu-scheduler /opt/vgpu-scheduler
# The Helm chart's podSecurityContext runs as this uid/gid with a read-only root filesystem.
USER 10001:10001
WORKDIR /tmp
# 8443: --http_bind of the extender (TLS) in the chart; 9395: --metrics-bind-address.
EXPOSE 8443 9395
ENTRYPOINT ["vgpu-scheduler"]
CMD ["--help"]

# One image for every draftgate component; compose.yaml picks the command.
# Two stages: the builder resolves the locked dependencies with uv; the final image gets
# only the virtual environment and the code (no uv, no pip, no compilers), run by a
# non-root user.

FROM python:3.11-slim AS builder

ENV PYTHONDONTWRITEBYTECODE=1 \
    UV_PROJECT_ENVIRONMENT=/opt/venv \
    UV_COMPILE_BYTECODE=1 \
    UV_LINK_MODE=copy

RUN pip install --no-cache-dir "uv==0.13.9"
WORKDIR /app
COPY pyproject.toml uv.lock README.md ./
# The project's runtime dependencies only: no dev or bench groups.
RUN uv sync --locked --no-default-groups --no-install-project
COPY service ./service
COPY workers ./workers
COPY mcp_adapter ./mcp_adapter
RUN uv sync --locked --no-default-groups --no-editable


FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    UV_PROJECT_ENVIRONMENT=/opt/venv \
    PATH=/opt/venv/bin:$PATH

# The user every component runs as: uid and gid 10001, named in compose.yaml, which tells
# operators to make the mounted secrets readable by it.
RUN groupadd --gid 10001 draftgate \
    && useradd --create-home --uid 10001 --gid 10001 draftgate

COPY --from=builder /opt/venv /opt/venv
WORKDIR /app
# The project itself is installed into the venv (--no-editable), migrations included
# (service/migrate.py finds them next to itself): no source tree is needed at run time.

# beat keeps its schedule here (a volume in compose.yaml); the image owns it for the user.
RUN mkdir -p /var/lib/draftgate && chown draftgate /var/lib/draftgate
USER draftgate
ENTRYPOINT ["draftgate"]
CMD ["--help"]

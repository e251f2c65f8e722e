# One image for every draftgate component; compose.yaml picks the command.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    UV_PROJECT_ENVIRONMENT=/opt/venv \
    PATH=/opt/venv/bin:$PATH

# The user every component runs as: uid and gid 10001, named in compose.yaml, which tells
# operators to make the mounted secrets readable by it.
RUN pip install --no-cache-dir "uv==0.13.9" \
    && groupadd --gid 10001 draftgate \
    && useradd --create-home --uid 10001 --gid 10001 draftgate

WORKDIR /app
COPY pyproject.toml uv.lock README.md ./
RUN uv sync --locked --no-dev --no-install-project
COPY service ./service
COPY workers ./workers
COPY mcp_adapter ./mcp_adapter
RUN uv sync --locked --no-dev

# beat keeps its schedule here (a volume in compose.yaml); the image owns it for the user.
RUN mkdir -p /var/lib/draftgate && chown draftgate /var/lib/draftgate
USER draftgate
ENTRYPOINT ["draftgate"]
CMD ["--help"]

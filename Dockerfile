# Two images from one file:
#   docker build --target web    -t treino-web .     # FastAPI + templates + lessons, no torch
#   docker build --target worker -t treino-worker .  # + CUDA PyTorch and bubblewrap
FROM python:3.11-slim-bookworm AS base
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /srv/treino
RUN useradd --system --uid 10001 --home /srv/treino treino
COPY pyproject.toml README.md ./
# Everything the web needs, without torch (the web process never imports it).
RUN python -c "import tomllib; deps = tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']; \
print('\n'.join(d for d in deps if not d.startswith('torch')))" > /tmp/web-requirements.txt \
 && pip install -r /tmp/web-requirements.txt "psycopg[binary]>=3.2"
COPY app app
COPY worker worker
COPY templates templates
COPY static static
COPY lessons lessons
COPY migrations migrations
COPY alembic.ini ./

FROM base AS web
RUN pip install --no-deps -e .
USER treino
EXPOSE 8000
CMD ["treino", "serve", "--host", "0.0.0.0", "--port", "8000", "--no-worker"]

FROM base AS worker
# bubblewrap is the sandbox; PyPI's Linux torch wheel is the CUDA build.
RUN apt-get update && apt-get install -y --no-install-recommends bubblewrap \
 && rm -rf /var/lib/apt/lists/* \
 && pip install "torch>=2.3" && pip install --no-deps -e .
USER treino
CMD ["treino", "worker"]

# Two images from one file:
#   docker build --target web    -t treino-web .     # FastAPI + templates + lessons, no torch
#   docker build --target worker -t treino-worker .  # + CUDA PyTorch and bubblewrap
FROM python:3.11-slim-bookworm AS base
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /srv/treino
RUN useradd --system --uid 10001 --home /srv/treino treino
COPY pyproject.toml requirements.lock README.md ./
# Everything the web needs, without torch (the web process never imports it), each package at the
# version requirements.lock pins (the lock as constraints: only what is asked for is installed),
# and the build backend the project itself is installed with below.
RUN python -c "import tomllib; deps = tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']; \
print('\n'.join(d for d in deps if not d.startswith('torch')))" > /tmp/web-requirements.txt \
 && pip install -c requirements.lock -r /tmp/web-requirements.txt "psycopg[binary]" setuptools
COPY app app
COPY worker worker
COPY contracts contracts
COPY templates templates
COPY static static
COPY lessons lessons
COPY migrations migrations
COPY alembic.ini ./

FROM base AS web
RUN pip install --no-deps --no-build-isolation -e .
USER treino
EXPOSE 8000
CMD ["treino", "serve", "--host", "0.0.0.0", "--port", "8000", "--no-worker"]

FROM base AS worker
# bubblewrap is the sandbox; the lock's torch from PyPI is the Linux wheel, the CUDA build (its CUDA
# libraries pinned by torch's own metadata).
RUN apt-get update && apt-get install -y --no-install-recommends bubblewrap \
 && rm -rf /var/lib/apt/lists/* \
 && pip install -c requirements.lock torch && pip install --no-deps --no-build-isolation -e .
USER treino
CMD ["treino", "worker"]

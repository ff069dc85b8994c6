# transformer-nmt's server in a container: every model under /models, served on port 8080
# with the JSON API, LibreTranslate's API and the web page.
#
#   docker build -t transformer-nmt .
#   docker run -p 8080:8080 -v "$PWD/models:/models:ro" transformer-nmt
#
# Settings come from NMT_* variables (nmt serve --help lists them), for example
#   docker run -e NMT_MAX_MODELS_LOADED=4 -e NMT_API_KEY=... ...
# The image is for CPUs: PyTorch comes from its CPU-only index, a tenth of the CUDA build.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    NMT_HOST=0.0.0.0 \
    NMT_PORT=8080

WORKDIR /opt/transformer-nmt
# torch first, from the CPU index, in the version pyproject.toml pins; the project's own
# install then finds it satisfied and never reaches for the CUDA build.
COPY pyproject.toml README.md ./
RUN python -c "import re, tomllib; pins = tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']; print(next(p for p in pins if re.match(r'torch\b', p)))" > /tmp/torch.txt \
    && pip install -r /tmp/torch.txt --index-url https://download.pytorch.org/whl/cpu
COPY src ./src
RUN pip install '.[serve,files]' && rm -rf /root/.cache

# Not root: the server only reads the models and writes its own temporary files.
RUN useradd --create-home --uid 10001 nmt
USER nmt
VOLUME ["/models"]
EXPOSE 8080
HEALTHCHECK --interval=30s --timeout=5s --start-period=120s \
    CMD python -c "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/ready' % os.environ.get('NMT_PORT', '8080'), timeout=4)"
ENTRYPOINT ["nmt", "serve"]
CMD ["--models", "/models"]

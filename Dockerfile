# transformer-nmt's server in a container: every model under /models, served on port 8080
# with the JSON API, LibreTranslate's API and the web page.
#
#   docker build -t transformer-nmt .
#   docker run -p 8080:8080 -v "$PWD/models:/models:ro" transformer-nmt
#
# or with a model baked into the image (a file under models/ in the build context):
#
#   docker build --build-arg MODEL=models/en-de.pt -t transformer-nmt:en-de .
#
# Settings come from NMT_* variables (nmt serve --help lists them), for example
#   docker run -e NMT_MAX_MODELS_LOADED=4 -e NMT_API_KEY=... ...
# The image is for CPUs: PyTorch comes from its CPU-only index, a tenth of the CUDA build.

# Stage 1: the project and its dependencies installed into a virtual environment; the
# build's caches and the source tree stay behind.
FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
WORKDIR /build
# torch first, from the CPU index, in the version pyproject.toml pins; the project's own
# install then finds it satisfied and never reaches for the CUDA build.
COPY pyproject.toml README.md ./
RUN python -c "import re, tomllib; pins = tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']; print(next(p for p in pins if re.match(r'torch\b', p)))" > torch.txt \
    && pip install -r torch.txt --index-url https://download.pytorch.org/whl/cpu
COPY src ./src
RUN pip install '.[serve,files]'

# Stage 2: the runtime: the virtual environment, a non-root user, the models.
FROM python:3.11-slim
ARG MODEL=""
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PATH=/opt/venv/bin:$PATH \
    NMT_HOST=0.0.0.0 \
    NMT_PORT=8080
COPY --from=build /opt/venv /opt/venv
# Not root: the server only reads the models and writes its own temporary files.
RUN useradd --create-home --uid 10001 nmt && mkdir /models
# A model baked in when MODEL names one (the .dockerignore lets models/ through);
# otherwise /models is where a volume is mounted. (COPY needs a source either way: the
# Dockerfile stands in, and is removed.)
COPY ${MODEL:-Dockerfile} /tmp/baked
RUN if [ -n "$MODEL" ]; then mv /tmp/baked "/models/$(basename "$MODEL")"; else rm /tmp/baked; fi \
    && chown -R nmt /models
USER nmt
VOLUME ["/models"]
EXPOSE 8080
HEALTHCHECK --interval=30s --timeout=5s --start-period=120s \
    CMD python -c "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/ready' % os.environ.get('NMT_PORT', '8080'), timeout=4)"
ENTRYPOINT ["nmt", "serve"]
CMD ["--models", "/models"]

# An image FROM the trainer image with your extra packages (docs/submit.md says when you need one).
# Build it next to your requirements.txt:
#   docker build -f custom-trainer.Dockerfile \
#     --build-arg TRAINER=ghcr.io/mwms-dev/mwms-trainer:<the operator's version> -t me/trainer:1 .
# then keep submitting your code as before: mwms submit train.py --replicas 4 --image me/trainer:1
# The trainer image of your operator's version (the chart's appVersion); its Python is 3.11.
ARG TRAINER
ARG PYTHON=docker.io/library/python:3.11.14-slim-bookworm

# The trainer image carries no pip: install with the same Python minor version in a build stage.
FROM ${PYTHON} AS build
COPY requirements.txt /tmp/requirements.txt
RUN python -m pip install --no-cache-dir --target /opt/extra -r /tmp/requirements.txt \
    && echo /opt/extra > /opt/mwms-extra.pth

FROM ${TRAINER}
COPY --from=build /opt/extra /opt/extra
# A .pth file puts /opt/extra after the trainer's own packages (PYTHONPATH would put it before), so your
# requirements cannot replace TensorFlow, tf-keras or MLflow by accident.
COPY --from=build /opt/mwms-extra.pth /opt/venv/lib/python3.11/site-packages/mwms-extra.pth

# An image FROM the trainer image with your extra packages (docs/submit.md says when you need one).
# Build it next to your requirements.txt:
#   docker build -f custom-trainer.Dockerfile \
#     --build-arg TRAINER=ghcr.io/mwms-dev/mwms-trainer:<the operator's version> -t me/trainer:1 .
# then keep submitting your code as before: mwms submit train.py --replicas 4 --image me/trainer:1
# The trainer image of your operator's version (the chart's appVersion); its Python is 3.11.
ARG TRAINER

FROM ${TRAINER}
# The trainer image has pip (for spec.code.requirements); root only to write /opt/extra and the .pth file.
USER 0
COPY requirements.txt /tmp/requirements.txt
# A .pth file puts /opt/extra after the trainer's own packages (PYTHONPATH would put it before), so your
# requirements cannot replace TensorFlow, tf-keras or MLflow by accident.
RUN python -m pip install --no-cache-dir --target /opt/extra -r /tmp/requirements.txt \
    && echo /opt/extra > /opt/venv/lib/python3.11/site-packages/mwms-extra.pth \
    && rm /tmp/requirements.txt
# Back to the uid the worker pods run as (runAsNonRoot is verified against it).
USER 65532:65532

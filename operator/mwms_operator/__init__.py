"""mwms-operator: a kopf operator that runs TrainJob objects as TensorFlow MWMS worker groups."""

__version__ = "0.1.0"

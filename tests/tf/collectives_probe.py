"""One worker of a group: fits the built-in model, reports the collective ops in its traced train function.

Run by test_collectives.py as `python collectives_probe.py` with TF_CONFIG set; prints one JSON line:
the collective ops (by graph function) of the train function fit traced, the steps per call, and the losses.
"""

from __future__ import annotations

import json

from mwms_trainer import model as model_mod
from mwms_trainer.input import exact
from mwms_trainer.tfenv import tensorflow
from mwms_trainer.trainer_config import TrainerConfig


def collective_ops(tf_function) -> list[list[str]]:
    """Per traced variant of the function: its collective ops and those of the functions it calls (its loop
    body is one step)."""
    found = []
    for concrete in tf_function._list_all_concrete_functions():
        graph = concrete.graph.as_graph_def()
        nodes = [*graph.node, *(node for f in graph.library.function for node in f.node_def)]
        found.append(sorted(node.op for node in nodes if node.op.startswith("Collective")))
    return found


def main() -> None:
    tf = tensorflow()
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    cfg = TrainerConfig(epochs=2, globalBatchSize=32)
    split = exact.load_split(cfg)
    steps = exact.steps_per_epoch(len(split.x_train), cfg.globalBatchSize)
    with strategy.scope():
        model = model_mod.build_model(
            split.num_features, split.mean, split.variance, steps_per_execution=steps
        )
    history = model.fit(exact.train_dataset(split, cfg), epochs=cfg.epochs, steps_per_epoch=steps, verbose=0)
    report = {"collectiveOps": collective_ops(model.train_tf_function), "steps": steps, **history.history}
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main()

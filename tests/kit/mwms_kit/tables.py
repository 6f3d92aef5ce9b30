"""Tables the tests train on, written as users' data pipelines write them."""

from __future__ import annotations

from pathlib import Path


def write_parts(directory: Path, files: int, rows: int = 400) -> list[Path]:
    """A Spark-style parquet table: `files` part files of `rows` rows (features a, b, c; label), _SUCCESS."""
    import numpy as np
    import pandas as pd

    directory.mkdir()
    rng = np.random.default_rng(7)
    for part in range(files):
        x = rng.normal(size=(rows, 3)) * [1.0, 10.0, 0.1] + [0.0, 5.0, -3.0]
        label = (x[:, 0] + (x[:, 1] - 5.0) / 10.0 > 0).astype(np.int64)
        frame = pd.DataFrame({"a": x[:, 0], "b": x[:, 1], "c": x[:, 2], "label": label})
        frame.to_parquet(directory / f"part-{part:05d}.snappy.parquet")
    (directory / "_SUCCESS").write_text("")
    return sorted(directory.glob("part-*.parquet"))

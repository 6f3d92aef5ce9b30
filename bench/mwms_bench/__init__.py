"""The benchmarks of mwms-operator: `python -m mwms_bench SCENARIO [options]` runs one scenario and appends
its record to bench/results/<scenario>.jsonl; `python -m mwms_bench report` renders docs/benchmarks.md."""

"""Pure: the TrainJob spec with the operator's defaults, and the worker pods and headless Service made from
it."""

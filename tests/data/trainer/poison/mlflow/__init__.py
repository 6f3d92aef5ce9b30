# A tripwire, put first on a non-chief worker's PYTHONPATH by the tf tests: non-chief workers must never
# import mlflow (several processes initialising one sqlite store crash; only the chief writes the run).
raise ImportError("mlflow imported on a non-chief worker")

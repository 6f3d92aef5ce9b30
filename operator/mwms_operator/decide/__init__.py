"""Pure decisions: which rule fires for a job, when its group restarts, and the status that is written."""

"""A user script that fails: the job must end Failed, not retried, with this traceback's last line."""


def load_table():
    raise KeyError("label column 'diagnosis' not found")


load_table()

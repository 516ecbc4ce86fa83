"""Prefect wiring for forgeline: the flow that walks dvc.yaml's graph. No pipeline logic lives here."""

import os

# Must be set before Prefect is imported anywhere: keep its state inside the project, give the temporary
# local server time to start on a busy 2-core machine, and send nothing anywhere.
os.environ.setdefault("PREFECT_HOME", os.path.join(os.getcwd(), ".prefect"))
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "90")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("DVC_NO_ANALYTICS", "1")

"""The Sluice view inside the Airflow UI: a FastAPI app (:mod:`.app`) behind Airflow's auth (:mod:`.auth`).

Pages are gathered and rendered by :mod:`pipeline.ui`, which knows nothing of Airflow; this package only
wires them to routes and to Airflow's authentication.
"""

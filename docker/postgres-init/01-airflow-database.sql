-- Runs once, when the postgres volume is first initialised: Airflow's metadata gets its own database on
-- the same server as the Sluice catalog (database "sluice", created from POSTGRES_DB).
CREATE DATABASE airflow;

"""The Sluice view's data and HTML, usable without Airflow (the plugin in ``plugins/`` only wires routes).

* :mod:`.pages` – what each page shows, gathered from the catalog (and the warehouse for the plots);
* :mod:`.quality` – the quality figures per episode over time, from either store;
* :mod:`.lineage` – any id (``episode:12``, ``blob:<sha256>``, ``manifest:<dataset>@<version>:<row>`` …)
  traced back to its raw file;
* :mod:`.render` – Jinja2 templates (``templates/``), autoescaped, relative links only;
* :mod:`.source` – the read-only catalog connection (the curation reader role) for given settings.
"""

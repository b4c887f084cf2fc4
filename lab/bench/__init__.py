"""``manage.py bench``: latency, accuracy, throughput and scale of the whole loop, measured on the
simulated cluster in a throwaway database and printed as one JSON document.

- ``scoring``: pure; matches anomalies and advice to the simulator's ground truth, percentiles.
- ``loop``: the whole loop in accelerated time, and the runs without it (manual baseline).
- ``scale``: one detection cycle at thousands of running workloads; the console's pages.
- ``throughput``: the signature library against ``grep -E`` on the same file.
- ``runs``: the options, the throwaway database, and the JSON document.
- ``report``: the HTML page with Plotly charts, from plain data.
"""

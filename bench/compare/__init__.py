"""Side-by-side benchmark against Apache RocketMQ 5.x (``make bench-compare``).

:mod:`bench.compare.java` fetches Apache RocketMQ with Maven and compiles our load
generator (``Driver.java``), :mod:`bench.compare.servers` starts either system on loopback
(also in controller mode), :mod:`bench.compare.controller` runs the failover and quorum-ack
cells, :mod:`bench.compare.results` saves the page after every cell and keeps the index,
``python -m bench.compare`` runs the comparison and writes ``bench/results/compare-<date-time>.*``.
Not part of ``make test``; ``tests/compat/test_java_client.py`` reuses the first two.
"""

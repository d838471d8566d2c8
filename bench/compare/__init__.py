"""Side-by-side benchmark against Apache RocketMQ 5.x (``make bench-compare``).

:mod:`bench.compare.java` fetches Apache RocketMQ with Maven and compiles our load
generator (``Driver.java``), :mod:`bench.compare.servers` starts either system on loopback,
``python -m bench.compare`` runs the comparison and writes ``bench/results/compare-<date>.*``.
Not part of ``make test``; ``tests/compat/test_java_client.py`` reuses the first two.
"""

"""RocketCluster: a RocketMQ-style message queue (NameServer, brokers, clients) in Python.

The wire protocol is the RocketMQ 4.x remoting protocol, so real RocketMQ
clients talk to these servers; see ``rocket.remoting``. The hot modules may be
compiled with mypyc; :mod:`rocket.compiled` decides which form is imported.
"""

from rocket.compiled import install_finder as _install_finder

__version__ = "0.1.0"

_install_finder()

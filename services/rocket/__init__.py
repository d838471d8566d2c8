"""RocketCluster: a RocketMQ-style message queue (NameServer, brokers, clients) in Python.

The wire protocol is the RocketMQ 4.x remoting protocol, so real RocketMQ
clients talk to these servers; see ``rocket.remoting``.
"""

__version__ = "0.1.0"

"""The broker: RocketMQ 4.x broker requests on top of :mod:`rocket.store`.

Start with :class:`rocket.broker.controller.BrokerController` (or ``rocket
broker``, :mod:`rocket.broker.main`). Modules, named after RocketMQ's classes:

* ``config``: :class:`BrokerConfig`, loaded from broker.conf/TOML/JSON plus flags;
* ``controller``: lifecycle, the write path, registration, stats;
* ``processor.send``/``pull``/``client_manage``/``admin``/``query``: request processors, each typed
  against a narrow Protocol of ``interfaces`` (not the controller), so it can be tested alone;
* ``metadata``: TopicConfigManager, SubscriptionGroupManager, ConsumerOffsetManager;
* ``long_polling``: PullRequestHoldService; ``schedule``: ScheduleMessageService
  (delay levels); ``client_manager``: ConsumerManager/ProducerManager;
  ``locks``: RebalanceLockManager; ``registration``: BrokerOuterAPI;
* ``headers``, ``filter``, ``heartbeat``: request headers, tag filter, heartbeat bodies;
* ``metrics``, ``stats``, ``http``: Prometheus metrics, counters, the HTTP side.

"""

from rocket.broker.config import BrokerConfig, ConfigError, load_config

__all__ = ["BrokerConfig", "ConfigError", "load_config"]

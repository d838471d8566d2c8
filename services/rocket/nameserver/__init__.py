"""The NameServer: route table, housekeeping, request processors, HTTP.

Brokers register with every NameServer (REGISTER_BROKER every 30 s);
producers and consumers ask any NameServer for a topic's route. NameServers
never talk to each other (RocketMQ's ``namesrv`` module: ``DefaultRequestProcessor``,
``RouteInfoManager``). See the README's "The NameServer" section.

Modules: :mod:`~rocket.protocol` (bodies), :mod:`~rocket.nameserver.routeinfo`
(route table), :mod:`~rocket.nameserver.processor` (request handlers),
:mod:`~rocket.nameserver.server` (the process), :mod:`~rocket.nameserver.client`
(typed calls for brokers and admin tools). The server is imported from
:mod:`rocket.nameserver.server` so that clients do not pull in aiohttp.
"""

from rocket.nameserver.config import NameServerConfig
from rocket.nameserver.routeinfo import RouteInfoManager

__all__ = ["NameServerConfig", "RouteInfoManager"]

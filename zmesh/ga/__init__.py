"""A bridge to GenericAgent (lsdefine/GenericAgent) sub-agents: each folder
``ROOT/temp/NAME/`` of a GenericAgent checkout becomes mesh agent ``NAME``,
spoken to over GenericAgent's own file protocol, so the bridge is a drop-in
for GenericAgent's master::

    async with zmesh.Node("lab") as node, GABridge(node, "/opt/GenericAgent", spawn=True):
        ...  # elsewhere: await agent.request("researcher", "task", "summarise today's arXiv")

A request on ``task`` is the sub-agent's next round (``reply.txt``; the
first, for a folder with no process, launches one); the reply is the
round's text once its output ends with ``[ROUND END]``. ``stop``,
``keyinfo`` and ``intervene`` write ``_stop``, ``_keyinfo`` and
``_intervene``; ``status`` tells the folder's state. A process that dies
mid-round gives its requester :class:`~zmesh.PeerLost`; one that ends
(GenericAgent waits ~600 s for a reply) leaves the mesh, unless the bridge
may launch it again. ``zmesh ga-bridge --root ROOT`` runs one from the
command line. See docs/genericagent.md.
"""

from ._process import LaunchError
from ._subagent import TRANSITIONS, State
from .bridge import CAPABILITY, CONTROL_TOPICS, LAUNCH_TOPIC, STATUS_TOPIC, TASK_TOPIC, GABridge

__all__ = ["GABridge", "LaunchError", "State", "TRANSITIONS", "TASK_TOPIC", "CONTROL_TOPICS", "STATUS_TOPIC",
           "LAUNCH_TOPIC", "CAPABILITY"]

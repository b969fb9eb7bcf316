"""The seed design's FileBroker (../shared/seeds/000_*), as written there, for
the file transport's interoperability tests: ``python _seed_file_broker.py
DIR COMMANDS.json`` runs each command (publish, subscribe, route, consume)
and prints what consume returned, one JSON line per call. The seed gives
no ``__init__``; the one here sets the two folders its methods use."""

import json
import sys
from pathlib import Path


# file_broker.py — 零依赖的 GA 消息总线
class FileBroker:
    """和 MQTT 的对应关系：
      Publisher  → 往 topics/X/ 写 .envelope 文件
      Subscriber → 从自己的 inbox/ 读消息
      Broker     → 搬运 .envelope topics/X/ → agent_Y/inbox/
      Topic      → topics/ 下的目录路径
      QoS        → .envelope 文件存在(=至少一次传递)
    """
    def __init__(self, root):  # not in the seed: the folders its methods use
        self.topics_dir = Path(root) / "topics"
        self.agents_dir = Path(root) / "agents"

    def publish(self, topic: str, envelope: dict):
        topic_path = self.topics_dir / topic.replace(".", "/")
        topic_path.mkdir(parents=True, exist_ok=True)
        msg_file = topic_path / f"msg_{envelope['header']['msg_id']}.envelope"
        msg_file.write_text(json.dumps(envelope, ensure_ascii=False, indent=2))

    def subscribe(self, agent_id: str, topic: str):
        sub_file = self.agents_dir / agent_id / "subscriptions" / topic.replace(".", "_")
        sub_file.parent.mkdir(parents=True, exist_ok=True)
        sub_file.write_text(topic)

    def route(self):
        """Broker 路由：将 topic 下的消息复制到订阅者的 inbox"""
        for sub_file in self.agents_dir.glob("*/subscriptions/*"):
            agent_id = sub_file.parent.parent.name
            topic = sub_file.read_text().strip()
            for msg_file in (self.topics_dir / topic.replace(".", "/")).glob("*.envelope"):
                inbox = self.agents_dir / agent_id / "inbox"
                inbox.mkdir(parents=True, exist_ok=True)
                dest = inbox / msg_file.name
                if not dest.exists():
                    dest.write_text(msg_file.read_text())
                msg_file.unlink()  # 分发后删除

    def consume(self, agent_id: str) -> list:
        """Agent 消费消息（读后即删 = ACK）"""
        messages = []
        for msg_file in sorted((self.agents_dir / agent_id / "inbox").glob("*.envelope")):
            messages.append(json.loads(msg_file.read_text()))
            msg_file.unlink()
        return messages


if __name__ == "__main__":
    broker = FileBroker(sys.argv[1])
    for command in json.loads(Path(sys.argv[2]).read_text()):
        result = getattr(broker, command[0])(*command[1:])
        if command[0] == "consume":
            print(json.dumps(result), flush=True)

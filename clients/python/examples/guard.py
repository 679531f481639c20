import asyncio, sys, uuid, cardgate
from a2a.client import create_client
from a2a.types import Message, Part, Role, SendMessageRequest

async def main(agent_url: str) -> None:
    async with cardgate.Registry() as registry:  # CARDGATE_URL, CARDGATE_API_KEY (role reporter)
        agent = registry.guard(await create_client(agent_url), card_url=agent_url)
        msg = Message(role=Role.ROLE_USER, message_id=str(uuid.uuid4()), parts=[Part(text="Hello")])
        async for response in agent.send_message(SendMessageRequest(message=msg)):
            print(response)  # each task ends exactly once, even when the agent sends two ends
asyncio.run(main(sys.argv[1]))

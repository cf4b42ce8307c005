"""One idle client of a node, by mode: waits in the call under test until killed."""
import asyncio, sys, time
import tickwire, tickwire.aio

mode, addr = sys.argv[1], sys.argv[2]
if mode == "sub":            # blocking iteration, nothing flowing
    s = tickwire.Subscriber(addr)
    s.subscribe("IDLE", ["A"])
    print("ready", flush=True)
    for e in s:
        pass
elif mode == "next":         # next(timeout) in a loop, 60 s each
    s = tickwire.Subscriber(addr)
    s.subscribe("IDLE", ["A"])
    print("ready", flush=True)
    while True:
        s.next(timeout=60)
elif mode == "pub":          # a publisher with one image, the program asleep
    p = tickwire.Publisher(addr, "IDLE")
    p.refresh("A", {"BID": 1.0})
    p.flush()
    print("ready", flush=True)
    time.sleep(3600)
elif mode == "aio":          # tickwire.aio, async for
    async def main():
        s = await tickwire.aio.connect(addr)
        s.subscribe("IDLE", ["A"])
        print("ready", flush=True)
        async for e in s:
            pass
    asyncio.run(main())
elif mode == "anext":        # the blocking Subscriber's async for
    async def main():
        s = tickwire.Subscriber(addr)
        s.subscribe("IDLE", ["A"])
        print("ready", flush=True)
        async for e in s:
            pass
    asyncio.run(main())
elif mode == "live":         # a LiveView, the program asleep
    v = tickwire.LiveView(addr, "IDLE", ["A"])
    v.wait_ready()
    print("ready", flush=True)
    time.sleep(3600)

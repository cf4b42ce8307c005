import socket, os, time, statistics
N=20000
ls=socket.socket(); ls.bind(('127.0.0.1',0)); ls.listen(1); port=ls.getsockname()[1]
if os.fork()==0:
    c=socket.create_connection(('127.0.0.1',port)); c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY,1)
    for _ in range(N):
        c.sendall(c.recv(1))
    os._exit(0)
s,_=ls.accept(); s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY,1)
rt=[]
for i in range(N):
    t=time.perf_counter_ns(); s.sendall(b'x'); s.recv(1); rt.append(time.perf_counter_ns()-t)
rt=rt[1000:]; rt.sort()
print("round trip over loopback TCP between two processes: p50 %.1f us, p10 %.1f, p90 %.1f, min %.1f" % (rt[len(rt)//2]/1e3, rt[len(rt)//10]/1e3, rt[len(rt)*9//10]/1e3, rt[0]/1e3))

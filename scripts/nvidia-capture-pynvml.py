#!/usr/bin/env python3
# What partop's NVML reader reads, read with pynvml into partop's recording form (NvNode JSON,
# `--nvidia-replay`), under a PyTorch load so graphics activity shows: two GPM samples a second
# apart (graphics activity), the XID event set drained without waiting, each process's SM share
# from NVML's per-process samples. For a machine where partop's binary cannot be carried (the
# device tool copies the lead's checkout); changes no GPU setting.
# Usage: python3 scripts/nvidia-capture-pynvml.py OUT.json
import json,time,socket,subprocess as sp,sys,os
import pynvml as N
o=sys.argv[1]
L=sp.Popen([sys.executable,'-c','import torch,time\na=torch.randn(8192,8192,device="cuda",dtype=torch.bfloat16)\nt=time.time()\nwhile time.time()-t<25:\n a=a@a;a=a/a.norm()\ntorch.cuda.synchronize()'])
time.sleep(8)
N.nvmlInit();h=N.nvmlDeviceGetHandleByIndex(0)
def t(f,*a):
 try:return f(*a)
 except Exception as e:return None
err={}
xs=None
try:
 xs=N.nvmlEventSetCreate();N.nvmlDeviceRegisterEvents(h,N.nvmlEventTypeXidCriticalError,xs)
except Exception as e:err['xid']=str(e);xs=None
gr=None
try:
 s1=N.nvmlGpmSampleAlloc();s2=N.nvmlGpmSampleAlloc();N.nvmlGpmSampleGet(h,s1);time.sleep(1);N.nvmlGpmSampleGet(h,s2)
 m=N.c_nvmlGpmMetricsGet_t();m.version=N.NVML_GPM_METRICS_GET_VERSION;m.numMetrics=1;m.sample1=s1;m.sample2=s2;m.metrics[0].metricId=N.NVML_GPM_METRIC_GRAPHICS_UTIL;N.nvmlGpmMetricsGet(m);gr=m.metrics[0].value
except Exception as e:err['gpm']=str(e)
xl,xc=(0,0) if xs else (None,None)
while xs:
 try:d=N.nvmlEventSetWait_v2(xs,0);xl=d.eventData;xc+=1
 except Exception:break
us={}
for s in t(N.nvmlDeviceGetProcessUtilization,h,0) or []:us[s.pid]=min(s.smUtil,100)
mi=t(N.nvmlDeviceGetMemoryInfo,h);u=t(N.nvmlDeviceGetUtilizationRates,h);mg=t(N.nvmlDeviceGetMigMode,h)
b=N.nvmlDeviceGetPciInfo(h).busId;b=(b.decode() if isinstance(b,bytes) else b).lower();b=b[4:] if len(b.split(':')[0])==8 else b
dv=N.nvmlSystemGetDriverVersion();dv=dv.decode() if isinstance(dv,bytes) else dv
nm=N.nvmlDeviceGetName(h);nm=nm.decode() if isinstance(nm,bytes) else nm
ps=[{'pid':p.pid,'name':t(N.nvmlSystemGetProcessName,p.pid),'used_mib':(p.usedGpuMemory>>20) if p.usedGpuMemory else None,'gi':None,'sm_util':us.get(p.pid,0)} for p in N.nvmlDeviceGetComputeRunningProcesses(h)]
for p in ps:
 if isinstance(p['name'],bytes):p['name']=p['name'].decode()
g={'index':0,'bdf':b,'name':nm,'uuid':N.nvmlDeviceGetUUID(h),'mem_total_mib':mi.total>>20,'mem_used_mib':mi.used>>20,'util_gpu':float(u.gpu),'util_mem':float(u.memory),'power_w':N.nvmlDeviceGetPowerUsage(h)/1000,'power_limit_w':N.nvmlDeviceGetEnforcedPowerLimit(h)/1000,'temp_c':float(N.nvmlDeviceGetTemperature(h,0)),'mem_temp_c':None,'sm_clock_mhz':N.nvmlDeviceGetClockInfo(h,1),'mem_clock_mhz':N.nvmlDeviceGetClockInfo(h,2),'mig_enabled':mg[0]==1 if mg else None,'mig_pending':mg[1]==1 if mg else None,'instances':[],'processes':ps,'profiles':[],'counters':{'energy_mj':t(N.nvmlDeviceGetTotalEnergyConsumption,h),'pcie_replays':t(N.nvmlDeviceGetPcieReplayCounter,h),'enc_util':float(t(N.nvmlDeviceGetEncoderUtilization,h)[0]),'dec_util':float(t(N.nvmlDeviceGetDecoderUtilization,h)[0]),'gr_engine_active':gr,'xid_last':xl,'xid_count':xc}}
json.dump({'source':'NVML (driver %s)'%dv,'driver':dv,'gpus':[g],'host':socket.gethostname(),'recorded_at':time.strftime('%Y-%m-%dT%H:%M:%SZ',time.gmtime()),'captured_by':'pynvml (scripts/nvidia-capture-pynvml.py)','errors':err},open(o,'w'),indent=2)
L.wait()

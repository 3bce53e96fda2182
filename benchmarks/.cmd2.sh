source benchmarks/device_setup.sh
E=0.19501319527626038
/usr/bin/time -f "synth wall %e s, max RSS %M KB" python3 -m daskjoin synth embeddings --n 10000000 --d 128 /tmp/emb.zarr 2>&1 | grep -v -i warn
python3 benchmarks/profile_task.py /tmp/emb.zarr --eps $E --count --backend gpu 2>&1 | grep -v -i warn | tail -8
for i in 1 2; do /usr/bin/time -f "CLI count wall %e s" python3 -m daskjoin join /tmp/emb.zarr --eps $E --count --timings $OUT/timings-$i.json 2>&1 | grep -v -i warn | tail -3; done
python3 -c "import json;print(json.load(open('$OUT/timings-2.json')))"

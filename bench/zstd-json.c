// Memory-tier compression estimate (issue 21 "Also"): zstd on JSON-like cache values, with and
// without a trained dictionary. Build and run: cc -O2 -o /tmp/zstd-json bench/zstd-json.c -lzstd && /tmp/zstd-json
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zstd.h>
#include <zdict.h>
static unsigned long long rng = 88172645463325252ULL;
static unsigned long long nx(void){ rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return rng; }
static const char *words[] = {"alpha","bravo","charlie","delta","echo","foxtrot","golf","hotel","india","juliet","kilo","lima","mike","november","oscar","papa"};
static size_t doc(char *out, size_t target) {
  size_t n = 0; int i = 0;
  n += sprintf(out + n, "{\"id\":%llu,\"user\":\"user%llu\",\"email\":\"user%llu@example.com\",\"active\":%s,\"created\":\"2026-%02llu-%02lluT%02llu:%02llu:00Z\",\"items\":[",
       nx()%1000000, nx()%100000, nx()%100000, (nx()&1)?"true":"false", 1+nx()%12, 1+nx()%28, nx()%24, nx()%60);
  while (n + 120 < target) {
    n += sprintf(out + n, "%s{\"sku\":\"SKU-%06llu\",\"name\":\"%s %s\",\"qty\":%llu,\"price\":%llu.%02llu}", i++ ? "," : "",
                 nx()%1000000, words[nx()%16], words[nx()%16], 1+nx()%9, nx()%500, nx()%100);
  }
  n += sprintf(out + n, "]}");
  return n;
}
static double now(void){ struct timespec t; clock_gettime(CLOCK_MONOTONIC,&t); return t.tv_sec + t.tv_nsec*1e-9; }
int main(void) {
  size_t sizes[] = {100, 1024, 10240};
  for (int si = 0; si < 3; si++) {
    size_t target = sizes[si]; int N = 2000;
    char **docs = malloc(N*sizeof(char*)); size_t *lens = malloc(N*sizeof(size_t)); size_t total = 0;
    for (int i = 0; i < N; i++) { docs[i] = malloc(target + 256); lens[i] = doc(docs[i], target); total += lens[i]; }
    // a dictionary from the first 1000 documents (samples concatenated)
    char *samples = malloc(total); size_t *slens = malloc(1000*sizeof(size_t)); size_t off = 0;
    for (int i = 0; i < 1000; i++) { memcpy(samples+off, docs[i], lens[i]); slens[i] = lens[i]; off += lens[i]; }
    char dict[16384]; size_t dsize = ZDICT_trainFromBuffer(dict, sizeof dict, samples, slens, 1000);
    if (ZDICT_isError(dsize)) dsize = 0;
    ZSTD_CCtx *cc = ZSTD_createCCtx(); ZSTD_DCtx *dc = ZSTD_createDCtx();
    ZSTD_CDict *cd = dsize ? ZSTD_createCDict(dict, dsize, 1) : NULL; ZSTD_DDict *dd = dsize ? ZSTD_createDDict(dict, dsize) : NULL;
    size_t cap = ZSTD_compressBound(target + 256); char *c = malloc(cap); char *d = malloc(target + 256);
    for (int mode = 0; mode < 2; mode++) {
      if (mode == 1 && !cd) continue;
      size_t csum = 0, rawsum = 0; double tc = 0, td = 0; int reps = 0;
      for (int i = 1000; i < N; i++) {
        double t0 = now();
        size_t cs = mode ? ZSTD_compress_usingCDict(cc, c, cap, docs[i], lens[i], cd) : ZSTD_compressCCtx(cc, c, cap, docs[i], lens[i], 1);
        double t1 = now();
        size_t ds = 0;
        for (int r = 0; r < 20; r++) ds = mode ? ZSTD_decompress_usingDDict(dc, d, target + 256, c, cs, dd) : ZSTD_decompressDCtx(dc, d, target + 256, c, cs);
        double t2 = now();
        if (ds != lens[i] || memcmp(d, docs[i], ds)) { printf("mismatch\n"); return 1; }
        csum += cs; rawsum += lens[i]; tc += t1 - t0; td += (t2 - t1) / 20; reps++;
      }
      printf("%6zu B JSON, %s: ratio %.2f (mean %zu -> %zu B), compress %.2f us, decompress %.2f us per value\n",
             target, mode ? "dictionary (16 KiB, trained on 1,000 values)" : "no dictionary, level 1", (double)rawsum/csum, rawsum/reps, csum/reps, tc*1e6/reps, td*1e6/reps);
    }
  }
  return 0;
}

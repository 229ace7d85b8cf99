// Memory-tier compression's hit cost (issue 21): zstd with a trained dictionary on 100,000 distinct
// JSON documents decompressed in scattered order (bench/zstd-json.c decompressed one frame 20 times:
// cache-hot, 0.11 µs, too low). Build and run: cc -O2 -o /tmp/zstd-scatter bench/zstd-scatter.c -lzstd && /tmp/zstd-scatter 200
#define ZSTD_STATIC_LINKING_ONLY
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
  size_t n = sprintf(out, "{\"id\":%llu,\"email\":\"user%llu@example.com\",\"created\":\"2026-11-%lluT%llu:%llu:00Z\",\"status\":\"%s\",\"items\":[",
     100000+nx()%900000, nx()%100000, 10+nx()%20, 10+nx()%14, 10+nx()%50, words[nx()%4]);
  int first=1;
  while (n < target) { n += sprintf(out+n, "%s{\"sku\":\"%s-%llu\",\"qty\":%llu,\"price\":%llu}", first?"":",", words[nx()%16], nx()%1000, nx()%9+1, nx()%10000); first=0; }
  return target;
}
static double now(void){ struct timespec t; clock_gettime(CLOCK_MONOTONIC,&t); return t.tv_sec + t.tv_nsec*1e-9; }
int main(int argc, char**argv) {
  size_t target = argc > 1 ? atoi(argv[1]) : 200; int N = 101000;
  char **docs = malloc(N*sizeof(char*)); size_t total=0;
  for (int i = 0; i < N; i++) { docs[i] = malloc(target + 512); doc(docs[i], target); total += target; }
  char *samples = malloc(1000*target); size_t slens[1000];
  for (int i = 0; i < 1000; i++) { memcpy(samples+i*target, docs[i], target); slens[i] = target; }
  char dict[16384]; size_t dsize = ZDICT_trainFromBuffer(dict, sizeof dict, samples, slens, 1000);
  ZSTD_DDict *dd = ZSTD_createDDict(dict, dsize);
  ZSTD_DCtx *dc = ZSTD_createDCtx();
  int M = 100000;
  char **fr = malloc(M*sizeof(char*)); size_t *fl = malloc(M*sizeof(size_t));
  char *out = malloc(target+512);
  for (int mode = 0; mode < 4; mode++) {
    int level = mode == 1 ? 3 : 1;
    ZSTD_CCtx *cc = ZSTD_createCCtx();
    ZSTD_CDict *cd = ZSTD_createCDict(dict, dsize, level);
    ZSTD_CCtx_refCDict(cc, cd);
    if (mode == 2) ZSTD_CCtx_setParameter(cc, ZSTD_c_literalCompressionMode, ZSTD_ps_disable);
    if (mode == 3) { ZSTD_CCtx_setParameter(cc, ZSTD_c_format, ZSTD_f_zstd1); ZSTD_CCtx_setParameter(cc, ZSTD_c_checksumFlag, 0); }
    size_t cs = 0; double t0 = now();
    for (int i = 0; i < M; i++) { fr[i] = malloc(target+64); fl[i] = ZSTD_compress2(cc, fr[i], target+64, docs[1000+i], target); if (ZSTD_isError(fl[i])) { printf("err %s\n", ZSTD_getErrorName(fl[i])); return 1;} cs += fl[i]; }
    double t1 = now();
    // decompress in a scattered order
    unsigned long long r = 12345; size_t ok = 0; double t2 = now();
    for (int k = 0; k < 3*M; k++) { r = r*6364136223846793005ULL+1; int i = (r>>33) % M;
      size_t d = mode == 3 ? ZSTD_decompressDCtx(dc, out, target+512, fr[i], fl[i]) : ZSTD_decompress_usingDDict(dc, out, target+512, fr[i], fl[i], dd);
      if (mode == 3) { ZSTD_DCtx_refDDict(dc, dd); }
      ok += d == target; }
    double t3 = now();
    printf("mode %d (%s): ratio %.2f, compress %.2f us, decompress %.3f us (%zu ok)\n", mode,
      mode==0?"level 1":mode==1?"level 3":mode==2?"level 1, raw literals":"level 1, refDDict+decompressDCtx",
      (double)target*M/cs, (t1-t0)*1e6/M, (t3-t2)*1e6/(3*M), ok);
    for (int i = 0; i < M; i++) free(fr[i]);
    ZSTD_freeCCtx(cc); ZSTD_freeCDict(cd);
  }
  return 0;
}

#include <nats/nats.h>
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char** argv) {
    int bad = 0;
    for (int i = 1; i <= atoi(argv[2]); ++i) {
        char f[64]; snprintf(f, sizeof f, "seed%d", i);
        FILE* fp = fopen(f, "r"); char seed[128]; fscanf(fp, "%127s", seed); fclose(fp);
        char pub[128]; snprintf(pub, sizeof pub, "%s", argv[3 + 0] ? "" : "");
        natsOptions* o; natsOptions_Create(&o); natsOptions_SetURL(o, argv[1]);
        // public key from the pairs file line i
        FILE* pp = fopen("p300", "r"); char s2[128], p2[128]; for (int k = 0; k < i; ++k) fscanf(pp, "%127s %127s", s2, p2); fclose(pp);
        natsOptions_SetNKeyFromSeed(o, p2, f);
        natsConnection* nc = NULL; natsStatus st = natsConnection_Connect(&nc, o);
        if (st != NATS_OK) { ++bad; printf("seed%d failed: %s %s\n", i, natsStatus_GetText(st), nats_GetLastError(NULL)); }
        else natsConnection_Destroy(nc);
        natsOptions_Destroy(o);
    }
    printf("bad %d\n", bad);
}

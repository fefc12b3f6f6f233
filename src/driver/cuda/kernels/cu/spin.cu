// The delay kernel (Driver::delay): one thread spins on the %globaltimer nanosecond clock until
// `ns` have passed, adding up forward steps only, so a backward step of the clock cannot end the
// wait early.

extern "C" __global__ void cudasem_spin(unsigned long long ns) {
    unsigned long long prev;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(prev));
    unsigned long long waited = 0;
    while (waited < ns) {
        unsigned long long now;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
        if (now > prev) {
            waited += now - prev;
        }
        prev = now;
    }
}

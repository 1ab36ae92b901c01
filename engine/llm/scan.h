// scan.h: one pass of replyd's sampler over a row of logits (scan.c).
#ifndef REPLYD_SCAN_H
#define REPLYD_SCAN_H

#include <stdint.h>

// replyd_scan finds the k largest of the n logits, sorted by decreasing
// logit (equal logits keep increasing ids), writing their ids to ids and
// values to vals, and returns how many it wrote (min(k, n)). It also writes
// log(sum(exp(logits))) to logz. n and k must be positive.
int replyd_scan(const float *logits, int n, int k, int32_t *ids, float *vals, double *logz);

// replyd_scan_masked is replyd_scan with the top k taken among the allowed
// logits only: logit i is allowed when bit i%8 of allow[i/8] is set (allow
// holds at least (n+7)/8 bytes). logz is still over all n logits. It returns
// how many it wrote, 0 when none is allowed.
int replyd_scan_masked(const float *logits, int n, int k, const uint8_t *allow, int32_t *ids, float *vals,
		       double *logz);

#endif

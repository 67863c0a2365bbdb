/* SPDX-License-Identifier: GPL-3.0-or-later */
/* A filter's run: every input through the pipeline (batch.h) of load,
 * filter and save (stages.h), CUDA started meanwhile if the job is worth it
 * (backend_choice.h). */
#ifndef CUDAFX_CLI_RUN_H
#define CUDAFX_CLI_RUN_H

#include "options.h"

/* Runs c (parsed, cli_parse_command); returns the exit status. */
int cli_run_filter (const cli_command *c);

#endif /* CUDAFX_CLI_RUN_H */

// cli.h: the `galley` commands. Each returns a GL_EXIT_* code.
#ifndef GALLEY_CLI_H
#define GALLEY_CLI_H

#include <stdio.h>

int cmd_train(int argc, char **argv);
int cmd_check(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_help(int argc, char **argv);
int cmd_report(int argc, char **argv);
int cmd_data(int argc, char **argv);
int cmd_ckpt(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_sweep(int argc, char **argv);  // cmd_sweep.c (src/sweep/)
int cmd_doctor(int argc, char **argv); // cmd_doctor.c (src/doctor/)
void cli_sweep_usage(FILE *out);       // `galley help sweep`
void cli_usage(FILE *out);
// Help text for one command, or -1 if there is no such command.
int cli_help_for(const char *command, FILE *out);

#endif

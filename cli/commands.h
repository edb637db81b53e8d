/* commands.h - the sub-commands of `rill`, one file each. Each returns the process exit code:
 * 0 success, 1 failure (message printed), 2 usage error. argv[0] is the sub-command's name. */
#ifndef RILL_CLI_COMMANDS_H
#define RILL_CLI_COMMANDS_H

int cmd_generate(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_logits(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_session_script(int argc, char **argv);

#endif /* RILL_CLI_COMMANDS_H */

/* commands.h - the sub-commands of `rill`, one file each. Each returns the process exit code:
 * 0 success, 1 failure (message printed), 2 usage error. argv[0] is the sub-command's name. */
#ifndef RILL_CLI_COMMANDS_H
#define RILL_CLI_COMMANDS_H

int cmd_generate(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_logits(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_session_script(int argc, char **argv);
int cmd_serve(int argc, char **argv);      /* `rill serve` / `rilld` (cmd_serve.c) */
int cmd_keygen(int argc, char **argv);     /* `rill keygen` (cmd_serve.c) */
int cmd_devices(int argc, char **argv);    /* `rill devices` (cmd_devices.c, ingest/rill_audio.h) */
int cmd_transcribe(int argc, char **argv); /* `rill transcribe` (cmd_transcribe.c, rill_asr.h) */
int cmd_translate(int argc, char **argv); /* `rill translate` (cmd_translate.c, rill_translate.h) */
/* The client of a running rilld (cmd_client.c, clients/rill_client.h). */
int cmd_session(int argc, char **argv);      /* `rill session new|close|list|stats|snapshot` */
int cmd_ingest(int argc, char **argv);       /* `rill ingest NAME` (text, --ticks) */
int cmd_ask(int argc, char **argv);          /* `rill ask NAME QUESTION` */
int cmd_standing(int argc, char **argv);     /* `rill standing add|rm|ls` */
int cmd_watch(int argc, char **argv);        /* `rill watch NAME` */
int cmd_server_stats(int argc, char **argv); /* `rill server-stats` */

#endif /* RILL_CLI_COMMANDS_H */

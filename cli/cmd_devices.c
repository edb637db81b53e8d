/*
 * cmd_devices.c - `rill devices`: the audio input devices PortAudio sees (ingest/rill_audio.h),
 * one per line: index, name, channels, default rate, separated by tabs (names may hold spaces).
 * The index is what `--device N` takes.
 *
 * While PortAudio probes, its host libraries (ALSA, JACK) print their own complaints on stderr
 * about every card or server that is not there; on a machine without sound hardware that is
 * dozens of lines before "no devices". So stderr is pointed at /dev/null for the probe unless
 * --verbose is given, and rill's own messages are printed after it is restored.
 */
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include "cli.h"
#include "commands.h"
#include "rill_audio.h"

#define MAX_DEVICES 256

int cmd_devices(int argc, char **argv) {
    bool verbose = false;
    const cli_opt_t opts[] = {
        { "verbose", "-v", CLI_FLAG, &verbose,
          "also print the host API of each device, and let the audio libraries' own messages "
          "through while probing",
          0, -1 },
        { 0 },
    };
    const char *pos[1];
    int n_pos = 0;
    int rc = cli_parse(argc, argv, 1, opts, "rill devices [--verbose]",
                       "Lists the audio input devices (PortAudio), one per line: index, name, "
                       "input channels, default rate in Hz, separated by tabs. The index is what "
                       "--device N takes.",
                       pos, 0, &n_pos);
    if (rc != 0) {
        return rc == 1 ? 0 : 2;
    }
    static rill_audio_device_t devs[MAX_DEVICES];
    int saved = -1;
    if (!verbose) {
        fflush(stderr);
        saved = dup(STDERR_FILENO);
        int null = open("/dev/null", O_WRONLY);
        if (saved >= 0 && null >= 0) {
            dup2(null, STDERR_FILENO);
        }
        if (null >= 0) {
            close(null);
        }
    }
    int64_t n = rill_audio_devices(devs, MAX_DEVICES);
    if (saved >= 0) {
        fflush(stderr);
        dup2(saved, STDERR_FILENO);
        close(saved);
    }
    if (n < 0) {
        fprintf(stderr, "rill devices: %s\n", rill_last_error((rill_err_t)n));
        return 1;
    }
    if (n == 0) {
        fprintf(stderr, "rill devices: no audio input devices (PortAudio found none; is a "
                        "microphone connected, and is this user allowed to use it?)\n");
        return 0;
    }
    for (int64_t i = 0; i < n && i < MAX_DEVICES; i++) {
        printf("%d\t%s\t%d\t%.0f", devs[i].index, devs[i].name, devs[i].channels, devs[i].rate);
        if (verbose) {
            printf("\t%s", devs[i].host_api);
        }
        printf("\n");
    }
    if (n > MAX_DEVICES) {
        fprintf(stderr, "rill devices: %lld more devices not shown\n",
                (long long)(n - MAX_DEVICES));
    }
    return 0;
}

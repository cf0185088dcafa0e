/* recordargs: a stand-in for python.exe (or powershell.exe, fltmc.exe) in batch tests.
 *
 * Appends one line per call to "<this exe's path>.args.txt": the arguments as received
 * (argv[1:], UTF-8, tab-separated), then one line "ENV" followed by every environment
 * variable whose name starts with EXEPY_ (tab-separated NAME=value).
 * Exits with the number in the environment variable RECORDARGS_EXIT_<NAME> (NAME = the exe
 * name without extension, upper-case), or 0. Built with x86_64-w64-mingw32-gcc -municode.
 */
#include <windows.h>
#include <stdio.h>
#include <stdlib.h>
#include <wchar.h>

int wmain(int argc, wchar_t **argv) {
    wchar_t self[MAX_PATH], log[MAX_PATH + 16], var[MAX_PATH + 32], *name, *dot, *value;
    char buf[8192];
    FILE *out;
    int i;
    GetModuleFileNameW(NULL, self, MAX_PATH);
    swprintf(log, MAX_PATH + 16, L"%ls.args.txt", self);
    out = _wfopen(log, L"ab");
    if (!out) return 99;
    for (i = 1; i < argc; i++) {
        WideCharToMultiByte(CP_UTF8, 0, argv[i], -1, buf, sizeof buf, NULL, NULL);
        fprintf(out, i > 1 ? "\t%s" : "%s", buf);
    }
    fputs("\nENV", out);
    for (i = 0; _wenviron[i]; i++) {
        if (wcsncmp(_wenviron[i], L"EXEPY_", 6) == 0) {
            WideCharToMultiByte(CP_UTF8, 0, _wenviron[i], -1, buf, sizeof buf, NULL, NULL);
            fprintf(out, "\t%s", buf);
        }
    }
    fputc('\n', out);
    fclose(out);
    name = wcsrchr(self, L'\\');
    name = name ? name + 1 : self;
    dot = wcsrchr(name, L'.');
    if (dot) *dot = 0;
    _wcsupr(name);
    swprintf(var, MAX_PATH + 32, L"RECORDARGS_EXIT_%ls", name);
    value = _wgetenv(var);
    return value ? _wtoi(value) : 0;
}

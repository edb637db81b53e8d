# cmake -DIN=FILE -DOUT=FILE.c -P embed.cmake: FILE's bytes as srv_status_page[] (NUL-ended) and
# srv_status_page_len, for server/door_http.c.
file(READ ${IN} hex HEX)
string(LENGTH "${hex}" n)
math(EXPR len "${n} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," body "${hex}")
file(WRITE ${OUT} "/* generated from server/status.html by server/embed.cmake: do not edit */\n"
     "#include <stddef.h>\n"
     "extern const unsigned char srv_status_page[];\nextern const size_t srv_status_page_len;\n"
     "const unsigned char srv_status_page[] = {${body}0x00};\n"
     "const size_t srv_status_page_len = ${len};\n")

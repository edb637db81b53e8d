# cmake -DIN=FILE -DOUT=FILE.c [-DNAME=SYMBOL] -P embed.cmake: FILE's bytes as SYMBOL[]
# (NUL-ended) and SYMBOL_len, for server/door_http.c; SYMBOL defaults to srv_status_page.
if(NOT DEFINED NAME)
    set(NAME srv_status_page)
endif()
get_filename_component(src ${IN} NAME)
file(READ ${IN} hex HEX)
string(LENGTH "${hex}" n)
math(EXPR len "${n} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," body "${hex}")
file(WRITE ${OUT} "/* generated from server/${src} by server/embed.cmake: do not edit */\n"
     "#include <stddef.h>\n"
     "extern const unsigned char ${NAME}[];\nextern const size_t ${NAME}_len;\n"
     "const unsigned char ${NAME}[] = {${body}0x00};\n"
     "const size_t ${NAME}_len = ${len};\n")

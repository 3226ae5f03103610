-- txcache.ddl_escape(text) RETURNS text: escapes a name for one tab-separated field of a
-- notice line: backslash, tab, newline and carriage return (docs/setup.md, "Escaping").

SELECT replace(replace(replace(replace($1, E'\\', E'\\\\'), E'\t', E'\\t'), E'\n', E'\\n'),
               E'\r', E'\\r')

"""The grammar of the Workflows expression language (the text inside ``${...}``).

Kept as a Python string so the package needs no data files.  Precedence follows
the "Order of operations" table of
https://cloud.google.com/workflows/docs/reference/syntax/datatypes (highest first):
``()``, ``.``, ``[]``, ``not``, unary ``-``, ``* / // %``, ``+ -``,
``< <= >= > == != in``, ``and``, ``or``.  Note that ``not`` binds tighter than
``in``: ``not "a" in l`` means ``(not "a") in l``.  Logical operators may be
lower- or upper-case but not mixed (same page).
"""

GRAMMAR = r"""
?start: expr

?expr: or_test

?or_test: and_test
        | or_test _or and_test          -> or_op

?and_test: comparison
         | and_test _and comparison     -> and_op

?comparison: sum
           | comparison COMP_OP sum     -> compare
           | comparison "in" sum        -> in_op

?sum: term
    | sum ADD_OP term                   -> binop

?term: unary
     | term MUL_OP unary                -> binop

?unary: postfix
      | _not unary                      -> not_op
      | "-" unary                       -> neg

?postfix: atom
        | postfix "." NAME              -> attr
        | postfix "[" expr "]"          -> index
        | postfix "(" [arguments] ")"   -> call

arguments: expr ("," expr)* [","]

?atom: INT                              -> int_lit
     | FLOAT                            -> float_lit
     | DQ_STRING                        -> dq_string
     | SQ_STRING                        -> sq_string
     | _true                            -> true_lit
     | _false                           -> false_lit
     | "null"                           -> null_lit
     | NAME                             -> var
     | "(" expr ")"
     | "[" [arguments] "]"              -> list_lit
     | "{" [map_items] "}"              -> map_lit

map_items: map_item ("," map_item)* [","]
map_item: expr ":" expr

_or: "or" | "OR"
_and: "and" | "AND"
_not: "not" | "NOT"
_true: "true" | "True" | "TRUE"
_false: "false" | "False" | "FALSE"

COMP_OP: "==" | "!=" | "<=" | ">=" | "<" | ">"
ADD_OP: "+" | "-"
MUL_OP: "//" | "*" | "/" | "%"

NAME: /[A-Za-z_][A-Za-z0-9_]*/
FLOAT: /[0-9]+\.[0-9]*([eE][+-]?[0-9]+)?/ | /[0-9]+[eE][+-]?[0-9]+/
INT: /[0-9]+/
DQ_STRING: /"(?:[^"\\\n]|\\.)*"/
SQ_STRING: /'(?:[^'\\\n]|\\.)*'/

%import common.WS
%ignore WS
"""

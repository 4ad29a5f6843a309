#!/bin/bash
# usage: backup.sh SRC DEST
src=$1
dest=$2
count=0
for f in $(find $src -type f); do
    rel=${f#$src/}
    mkdir -p $dest/$(dirname $rel)
    cp $f $dest/$rel
done
echo "backed up $count files"

// Lint for all TypeScript sources (tests included); formatting is prettier's
// job (`npm run format:check`), so no stylistic rules here.
import js from '@eslint/js';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  { ignores: ['dist/**', 'node_modules/**', '.tap/**', 'crds/*.yaml', 'launcher/proto/generated/**'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    languageOptions: { ecmaVersion: 2022, sourceType: 'module' },
    rules: {
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_', caughtErrors: 'none' }],
      // Kubernetes objects arrive as loosely typed JSON; `!` after a check the compiler cannot follow is deliberate.
      '@typescript-eslint/no-non-null-assertion': 'off',
      'no-constant-condition': ['error', { checkLoops: false }],
      // A variable assigned after the closures that read it are created.
      'prefer-const': ['error', { ignoreReadBeforeAssign: true }],
    },
  },
  {
    // Product code never reaches into test/ (structure.test.ts checks it too).
    files: ['provider/**/*.ts', 'vmm/**/*.ts', 'launcher/**/*.ts', 'crds/**/*.ts', 'deploy/**/*.ts'],
    ignores: ['**/*.test.ts'],
    rules: {
      'no-restricted-imports': ['error', { patterns: [{ group: ['**/test/**'], message: 'product code must not import test helpers' }] }],
    },
  },
  {
    // provider/ sees the launcher through one seam module only.
    files: ['provider/**/*.ts'],
    ignores: ['**/*.test.ts'],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          patterns: [
            { group: ['**/test/**'], message: 'product code must not import test helpers' },
            {
              group: ['**/launcher/*', '!**/launcher/agent-api.js'],
              message: 'provider/ imports the launcher only through launcher/agent-api.ts',
            },
          ],
        },
      ],
    },
  },
);
